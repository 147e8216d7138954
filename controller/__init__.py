"""autoswitch.controller"""
