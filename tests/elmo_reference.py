"""NumPy references for ELMo's pieces (docs/algorithms.md §14; AllenNLP's semantics), float64.

Written from the formulas, loop by loop, never from kbert code: the character
convolution slides window by window, and the backward LSTM reverses each row
within its length, as AllenNLP's `LstmCellWithProjection` does.
"""

import numpy as np


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def relu(x):
    return np.maximum(x, 0.0)


def np_highway(x, layers, activation=relu):
    """`g·x + (1 − g)·f(transform)`; each layer's `(kernel, bias)` gives `[transform | gate]`."""
    x = np.asarray(x, np.float64)
    for kernel, bias in layers:
        projected = x @ kernel + bias
        width = x.shape[-1]
        gate = sigmoid(projected[..., width:])
        x = gate * x + (1.0 - gate) * activation(projected[..., :width])
    return x


def np_character_cnn(character_ids, embedding, filters, highway, projection):
    """Token vectors `(batch, sequence, dim)` from character ids `(batch, sequence, chars)`.

    `filters`: `(kernel (width, char_dim, count), bias)` per width; `projection`: `(kernel, bias)`.
    """
    characters = np.asarray(embedding, np.float64)[character_ids]  # (b, s, chars, d)
    num_chars = characters.shape[2]
    features = []
    for kernel, bias in filters:
        width = kernel.shape[0]
        windows = []
        for start in range(num_chars - width + 1):
            window = sum(characters[:, :, start + k] @ kernel[k] for k in range(width)) + bias
            windows.append(window)
        features.append(relu(np.max(np.stack(windows, axis=2), axis=2)))
    features = np.concatenate(features, axis=-1)
    kernel, bias = projection
    return np_highway(features, highway) @ kernel + bias


def np_lstm_row(x, input_kernel, recurrent_kernel, bias, projection_kernel, cell_clip, projection_clip):
    """One row's real steps `(length, input)` in order: the projected outputs `(length, output)`."""
    cells = recurrent_kernel.shape[1] // 4
    h = np.zeros(projection_kernel.shape[1])
    c = np.zeros(cells)
    outputs = []
    for x_t in x:
        z = x_t @ input_kernel + h @ recurrent_kernel + bias
        i, f, g, o = (z[k * cells : (k + 1) * cells] for k in range(4))
        c = sigmoid(i) * np.tanh(g) + sigmoid(f) * c
        if cell_clip:
            c = np.clip(c, -cell_clip, cell_clip)
        h = (sigmoid(o) * np.tanh(c)) @ projection_kernel
        if projection_clip:
            h = np.clip(h, -projection_clip, projection_clip)
        outputs.append(h)
    return np.stack(outputs)


def np_projected_lstm(x, lengths, weights, cell_clip=None, projection_clip=None, backwards=False):
    """`(batch, sequence, output)`: each row's first `lengths[b]` steps, reversed within them if
    `backwards`; zeros after them. `weights`: input, recurrent, bias, projection kernels."""
    x = np.asarray(x, np.float64)
    output_dim = weights[3].shape[1]
    outputs = np.zeros(x.shape[:2] + (output_dim,))
    for row, length in enumerate(lengths):
        steps = x[row, :length][::-1] if backwards else x[row, :length]
        row_outputs = np_lstm_row(steps, *weights, cell_clip, projection_clip)
        outputs[row, :length] = row_outputs[::-1] if backwards else row_outputs
    return outputs
