"""The Open Inference Protocol v2 over gRPC: a second front end on the engine client."""
