"""The gRPC face: ``inference.GRPCInferenceService`` of the Open Inference Protocol.

NOTE: the generated messages register ``inference.*`` in protobuf's default
pool, as tritonclient's do: the two cannot be imported in one process.
"""
