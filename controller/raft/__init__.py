"""autoswitch.controller.raft"""
