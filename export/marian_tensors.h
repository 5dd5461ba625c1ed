// psformer's parameters as the tensors of transformers' MarianMTModel (POST_LN models: the paper's
// Transformer) or PegasusForConditionalGeneration (PRE_LN models). Both have sinusoidal positions
// added to embeddings scaled by sqrt(d_model), one embedding shared by source, target and the
// output projection, and the same names for a layer's tensors; Pegasus normalises before each
// sub-layer and adds a final LayerNorm to each stack (model.{encoder,decoder}.layer_norm), as
// psformer's PRE_LN does (encoder.final_ln, decoder.final_ln). docs/export.md says why Pegasus.
//
// Two layouts differ and are converted here:
// - Matrices: psformer stores W (in, out) with y = x W + b; torch's nn.Linear stores (out, in).
//   Fused projections are split: w_qkv's column blocks [Q | K | V] become q_proj, k_proj and
//   v_proj, w_kv's [K | V] k_proj and v_proj. Heads are consecutive blocks of d/h columns in both.
// - The model dimension: psformer interleaves its sinusoids (column 2i sin, 2i+1 cos, both of
//   frequency i), transformers puts all sines first, then all cosines. Element j of every
//   model-dimension vector in the export is element ModelDimensionOrder(d)[j] of psformer's:
//   the embedding's columns, the positions' columns, every projection's input rows (read from
//   the residual stream) or output columns (written to it), LayerNorm gains and shifts, biases
//   of outputs written to the residual stream. Attention and feed-forward inner dimensions are
//   not the residual stream and keep their order. A fixed permutation of the model dimension
//   changes no logit (LayerNorm and dot products do not depend on the order of the elements).
#ifndef PSFORMER_EXPORT_MARIAN_TENSORS_H_
#define PSFORMER_EXPORT_MARIAN_TENSORS_H_

#include <vector>

#include "common/model_file.h"
#include "common/status.h"
#include "export/safetensors_file.h"

namespace psformer {

// For an even d: [0, 2, 4, .., d-2, 1, 3, .., d-1].
std::vector<int> ModelDimensionOrder(int d);

// The transformers architecture a model exports as: MarianMTModel for POST_LN, Pegasus for PRE_LN.
enum class ExportArchitecture { kMarian, kPegasus };
ExportArchitecture ArchitectureOf(const ModelFile& model);
// "MarianMTModel" or "PegasusForConditionalGeneration", as config.json's "architectures" names it.
const char* ArchitectureName(ExportArchitecture architecture);

// Fails, naming what, for a model the export cannot hold: an odd d_model, heads that do not
// divide d_model, a parameter count that is not the layout's.
Status CheckExportable(const ModelFile& model);

// Every tensor of the architecture's state dict that is not tied to another: model.shared.weight
// (encoder, decoder and lm_head tie to it), both stacks' layers, for PRE_LN each stack's final
// model.{encoder,decoder}.layer_norm, the sinusoid tables model.{encoder,decoder}.embed_positions.weight
// (psformer's values, in transformers' order, max_positions rows), and final_logits_bias (zeros:
// psformer's output projection has no bias).
// REQUIRES: CheckExportable(model) is OK.
std::vector<NamedTensor> MarianTensors(const ModelFile& model);

}  // namespace psformer

#endif  // PSFORMER_EXPORT_MARIAN_TENSORS_H_
