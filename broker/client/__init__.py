"""autoswitch.broker.client.client: the client SDK: the gRPC producer/consumer client, the routed producer and fetcher that follow the name server, and the fetch-port client."""
