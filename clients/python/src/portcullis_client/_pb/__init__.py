"""Generated gRPC stubs of proto/portcullis/v1 (scripts/generate_stubs.py). Do not edit."""
