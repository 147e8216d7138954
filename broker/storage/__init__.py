"""autoswitch.broker.storage: the broker's storage: the commit log and its segments, the record format, the consume index, the checkpoint, the MessageStore over them."""
