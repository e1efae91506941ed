"""One module per platform protocol: parse and validate its request, render its answer and error body."""
