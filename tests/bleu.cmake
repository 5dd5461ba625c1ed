# BLEU (worker/translate/): the 13a tokenizer and corpus BLEU against vectors computed with sacreBLEU
# (tests/data/bleu, made by tests/reference/make_bleu_vectors.py), and the `psformer bleu` command.
psformer_test(bleu_test unit
  SOURCES bleu_test.cc tokenizer_13a_test.cc
  LIBS psformer_translate)
