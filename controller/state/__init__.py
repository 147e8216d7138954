"""The replicated state machine of the controller, pure: the state, what each request does to it
(statemachine.py, election.py), its snapshot and replicated config, and the history record it emits."""
