"""Stubs generated from ../proto/grpc_predict_v2.proto by `make generate`; do not edit."""
