"""Mask builders. One convention: masks are valid lengths (see `mtx.model.attention`).

A length of n for a query means it may attend to keys 0..n-1. Built once at the top of
`Transformer.encode` / `Transformer.decode`; layers only receive them.

    src_valid_len = [3, 2], S = 4           causal_valid_len, T = 3
    encoder self / cross attention:         query t attends to keys 0..t
        sentence 0 attends to keys 0,1,2        lengths per query: [1, 2, 3]
        sentence 1 attends to keys 0,1
"""


def causal_valid_len(F, tgt_embedded, any_lens):
    """Per-query lengths for decoder self-attention: query t sees keys 0..t.

    tgt_embedded (B, T, D) gives T, any_lens (B,) (any per-sentence array) gives B
    -> (B, T) int32 with every row [1, 2, ..., T]. Padding positions need no mask: nothing
    before them is padding, and their outputs are dropped by the loss.
    """
    positions = F.npx.arange_like(tgt_embedded, axis=1).astype("int32") + 1  # (T,)
    zeros = F.npx.reshape(any_lens.astype("int32"), (-2, 1)) * 0  # (B, 1)
    return zeros + positions  # (B, T)
