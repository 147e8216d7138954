"""autoswitch.ha"""
