"""autoswitch.epochfile"""
