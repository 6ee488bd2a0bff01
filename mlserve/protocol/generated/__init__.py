"""TF Serving's config messages, generated from ../proto/model_server_config.proto by
`make generate`; do not edit."""
