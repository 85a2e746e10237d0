"""The exporter: a model that uses my_ops to a verified AOTInductor package (see pipeline.py)."""
