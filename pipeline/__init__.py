"""autoswitch.pipeline"""
