# Decoding: incremental decoder, beam search, psformer translate.
psformer_test(incremental_decoder_test unit SOURCES incremental_decoder_test.cc LIBS psformer_translate psformer_common)
psformer_test(beam_search_test unit SOURCES beam_search_test.cc LIBS psformer_translate psformer_common)
psformer_test(translate_command_test integration SOURCES translate_command_test.cc LIBS psformer_model psformer_common)
psformer_test(copy_translation_test integration SOURCES copy_translation_test.cc LIBS psformer_worker psformer_common)
if(PSFORMER_HAVE_CUDA)
  psformer_test(decode_cuda_test gpu SOURCES decode_cuda_test.cc LIBS psformer_cuda_backend psformer_translate
                psformer_common)
endif()
