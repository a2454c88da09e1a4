"""The interface of a checkpoint converter: one family's config keys and weight names."""

import warnings

from kbert.checkpoints.weight_mapping import (
    assign_tensors,
    layer_tensor_names,
    read_tensors,
    resolve_sublayer,
    strip_prefix,
)


class Converter:
    """How the Hugging Face checkpoints of one family become a kbert backbone.

    A converter is registered (`kbert.checkpoints.registry.register_converter`)
    for the `model_type`s it reads. `load` is what `from_huggingface` runs;
    the pieces are separate so that a task converter (fine-tuning heads:
    `classifier`, `qa_outputs` …) can reuse them: `config_to_arguments` for the
    backbone, `task_prefix` to tell the backbone's tensors from the head's, and
    `weight_names` for the backbone's variables.

    Subclasses set:
        model_types: the `model_type`s of `config.json` this converter reads.
        task_prefix: the prefix of the backbone's tensors in task checkpoints
            (`"bert."` in `BertForMaskedLM`); `""` when there is none.
        backbone_class: the kbert backbone it builds (`Encoder`, `T5`).

    and implement `config_to_arguments` and `sublayer_modules`.

    Example:
    >>> from kbert.checkpoints.registry import converter_for
    >>> import kbert.checkpoints  # registers the converters
    >>> converter = converter_for("bert")
    >>> arguments = converter.config_to_arguments({"vocab_size": 30, "hidden_size": 8,
    ...     "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16})
    >>> backbone = converter.backbone_class(**arguments)
    >>> converter.weight_names(backbone, {})["embeddings/token_embedding/embeddings"]
    ('embeddings.word_embeddings.weight', False)
    """

    model_types = ()
    task_prefix = ""
    backbone_class = None

    def config_to_arguments(self, config):
        """The backbone's constructor arguments for a parsed `config.json`.

        Raises:
            ValueError: a config option kbert cannot represent.
        """
        raise NotImplementedError(f"{type(self).__name__}: config_to_arguments is abstract; a converter defines it.")

    def arguments_from_tensors(self, arguments, tensors):
        """`arguments` (the config's, overrides applied) completed or checked against the
        backbone's `tensors` (e.g. whether the checkpoint has a pooler); as they are by default."""
        return arguments

    def absent_parts(self, tensors, overrides):
        """Descriptions of the optional parts `tensors` lack and `overrides` do not mention.

        `load` warns of each: the backbone is built without them. None by default.
        """
        return ()

    def ignored_tensors(self, backbone):
        """Backbone tensors of a checkpoint that `backbone` may leave unread; none by default."""
        return ()

    def read_backbone(self, config, directory, overrides):
        """`(backbone, tensors, backbone_tensor_names)` for the checkpoint in `directory`.

        The backbone is built (not filled) from `config` and `overrides`;
        `tensors` are the checkpoint's, task prefix stripped; the backbone's
        tensors among them (those under `task_prefix` in a task checkpoint,
        all in a bare one), less `ignored_tensors`, are those it must read.
        """
        arguments = {**self.config_to_arguments(config), **overrides}
        stored = read_tensors(directory)
        tensors = strip_prefix(stored, self.task_prefix)
        prefix = self.task_prefix
        own = [name[len(prefix) :] for name in stored if prefix and name.startswith(prefix)]
        backbone = self.backbone_class(**self.arguments_from_tensors(arguments, tensors))
        ignored = set(self.ignored_tensors(backbone))
        return backbone, tensors, [name for name in own or tensors if name not in ignored]

    def sublayer_modules(self, backbone, tensors):
        """`(kbert layer, HF module name)` for every sublayer of `backbone` with weights.

        Raises:
            AttributeError: an attribute path of the converter does not
                resolve on `backbone` (see `weight_mapping.resolve_sublayer`).
        """
        raise NotImplementedError(f"{type(self).__name__}: sublayer_modules is abstract; a converter defines it.")

    def block_modules(self, blocks, block_names, prefix, description="block"):
        """`(kbert layer, HF module name)` for the sublayers of each distinct block of `blocks`.

        `block_names` maps a block's attribute path to its module name and
        `prefix` (with `{i}`) names block `i`'s modules; a block at several
        positions (ALBERT's shared layers) is listed once, at its first.
        """
        pairs, seen = [], set()
        for index, block in enumerate(blocks):
            if id(block) in seen:
                continue
            seen.add(id(block))
            for path, module in block_names.items():
                entry = f"{self!r} {description} {path!r}: {module!r}"
                pairs.append((resolve_sublayer(block, path, entry), prefix.format(i=index) + module))
        return pairs

    def weight_names(self, backbone, tensors):
        """`{variable path: (tensor name, transpose)}` for every variable of `backbone`."""
        names = {}
        for layer, module in self.sublayer_modules(backbone, tensors):
            names.update(layer_tensor_names(layer, module))
        return names

    def missing_tensor_hint(self, config):
        """Words added to the missing-tensor error for this `config`; none by default."""
        return ""

    def load(self, config, directory, **overrides):
        """The backbone for `config` with every weight read from the checkpoint in `directory`.

        Args:
            config: the parsed `config.json`; its options are checked before
                any weight file is read.
            directory: the checkpoint directory (see `weight_mapping.read_tensors`).
            **overrides: constructor arguments that replace those of the config.
        """
        backbone, tensors, backbone_tensors = self.read_backbone(config, directory, overrides)
        for part in self.absent_parts(tensors, overrides):
            warnings.warn(f"The checkpoint in {directory} has no {part}.", stacklevel=3)
        names = self.weight_names(backbone, tensors)
        hint = self.missing_tensor_hint(config)
        assign_tensors(backbone, names, tensors, directory, hint, must_read=backbone_tensors)
        return backbone

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(self.model_types)})"
