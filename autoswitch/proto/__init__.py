"""Generated protobuf/gRPC code. Sources: proto/autoswitch/proto/*.proto; regenerate with `make proto`."""
