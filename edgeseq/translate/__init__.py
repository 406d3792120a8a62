"""English -> French translation with encoder-decoder models: a Transformer and an LSTM with
additive attention. Corpus and tokenizer need no torch; training and export do; the runtime
(`edgeseq.translate.runtime`) runs on numpy, onnxruntime and tokenizers."""
