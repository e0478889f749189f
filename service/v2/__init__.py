"""The Open Inference Protocol v2: its REST bodies and the tensor types REST and gRPC share."""
