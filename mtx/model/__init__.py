"""The Transformer: the d2l attention block, masks, layers, encoder, decoder, the model,
and the precision of its products."""
