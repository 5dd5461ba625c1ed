# cmake -DSOURCE_DIR=DIR -DOUT=FILE -P cmake/SourceCommit.cmake: writes FILE, a header that
# defines PSFORMER_SOURCE_COMMIT ("c06c389abcd0" from `git describe --always --dirty`, or
# "unknown" outside a git checkout) and PSFORMER_SOURCE_DATE (the commit's date, or ""). Run at
# every build; FILE is rewritten only when that changes, so a second build compiles nothing.
set(commit "unknown")
set(date "")
# Only the source tree's own checkout: sources unpacked inside some other repository are not
# that repository's commit.
execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse --show-toplevel
                OUTPUT_VARIABLE top OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE failed)
if(NOT failed)
  file(REAL_PATH "${top}" top)
  file(REAL_PATH "${SOURCE_DIR}" source)
endif()
if(NOT failed AND top STREQUAL source)
  execute_process(COMMAND git -C "${SOURCE_DIR}" describe --always --dirty --abbrev=12
                  OUTPUT_VARIABLE described OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE failed)
  if(NOT failed AND NOT described STREQUAL "")
    set(commit "${described}")
    execute_process(COMMAND git -C "${SOURCE_DIR}" log -1 --format=%cs
                    OUTPUT_VARIABLE date OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
endif()
file(WRITE "${OUT}.new" "// Written by cmake/SourceCommit.cmake at build time.\n"
                        "#define PSFORMER_SOURCE_COMMIT \"${commit}\"\n"
                        "#define PSFORMER_SOURCE_DATE \"${date}\"\n")
file(COPY_FILE "${OUT}.new" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.new")
