"""The one package that asks a backend framework what Keras cannot (docs/architecture.md §5).

`ops` is the neutral API the rest of kbert calls; `torch_ops`, `jax_ops` and
`tensorflow_ops` answer it per backend; `fast_paths` holds the process
defaults and the PyTorch fast-path switch; `torch_compilation` compiles
PyTorch's training and decoding steps; `private_state` holds every read of
a private Keras or PyTorch attribute; `imports` imports frameworks quietly
and lazily.
"""
