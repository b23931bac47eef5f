"""The sections of ``AlgorithmConfig``, one module per builder method (see ``section``)."""
