"""autoswitch.broker"""
