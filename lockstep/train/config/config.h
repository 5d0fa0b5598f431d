#pragma once
// The trainer's config (`lockstep train CONFIG`): a YAML or JSON document using DeepSpeed's key
// names where they exist, plus lockstep's own (model, data, epochs, ...). docs/config.md lists
// every key. Resolution is pure: text + overrides + world size -> TrainConfig, or a ValueError
// naming the key (with its path), what was expected, and the nearest known key for a typo.
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/kernels/gpu_math_options.h"
#include "lockstep/nn/models/model_zoo.h"
#include "lockstep/optim/loss_scaler.h"
#include "lockstep/optim/registry.h"
#include "lockstep/parallel/ddp/distributed_data_parallel.h"
#include "lockstep/parallel/precision.h"
#include "lockstep/tensor/device.h"
#include "lockstep/train/config/pipeline_config.h"
#include "lockstep/train/config/zero_config.h"
#include "lockstep/util/suggest.h"

namespace lockstep::train {

struct BatchSizes {
  int64_t train_batch_size = 0;  // global: micro * accumulation * world
  int64_t micro_batch_size = 0;  // per rank per forward/backward
  int64_t gradient_accumulation_steps = 1;
};

/// DeepSpeed's rule: any two of (train, micro, accum) fix the third with the world size; one alone
/// takes accum = 1. ValueError naming all three and the world size when they disagree or do not
/// divide; when none is set.
/// With a pipeline, world_size is the data-parallel size and `world_name` says so in messages.
BatchSizes resolveBatchSizes(std::optional<int64_t> train, std::optional<int64_t> micro,
                             std::optional<int64_t> accum, int64_t world_size,
                             const std::string& world_name = "world size");

struct MonitorConfig {
  bool enabled = false;
  std::string output_path;  // empty: the output dir
  std::string job_name = "lockstep";
};

struct DataConfig {
  std::string dataset = "synthetic";  // a name from data::datasetNames()
  /// text: a text file or directory (default Debian's fortunes); tokens: a directory written by
  /// `lockstep data tokenize` (train.bin, val.bin, meta.json).
  std::string root;
  double val_split = 0.0;  // fraction of the training set held out for per-epoch validation
  int64_t num_workers = 0;
  std::optional<double> normalize_mean, normalize_std;  // transforms.normalize
  bool random_crop = false, horizontal_flip = false;    // transforms (cifar10)
  /// transforms of image_folder (torchvision's ImageNet recipe, each part with torchvision's
  /// parameters): RandomResizedCrop's scale and ratio, RandomHorizontalFlip (on unless
  /// horizontal_flip: false), ColorJitter's strengths (all 0: none).
  std::array<double, 2> crop_scale{0.08, 1.0}, crop_ratio{3.0 / 4.0, 4.0 / 3.0};
  bool image_horizontal_flip = true;
  std::array<double, 4> color_jitter{0, 0, 0, 0};  // brightness, contrast, saturation, hue
  /// transforms.to_dtype of image_folder: the images' dtype after Normalize (f32, or bf16 in a bf16
  /// run: torchvision's ToDtype(torch.bfloat16) after Normalize).
  DType image_dtype = DType::f32;
  // synthetic only
  int64_t size = 1024, test_size = 256, num_classes = 10;
  std::vector<int64_t> input_shape{20};
  // text and tokens: windows of block_size (the model's) + 1 tokens; val_split is the last
  // fraction of a text corpus held out (default 0.1).
  int64_t block_size = 0;
  // image_folder (data::DatasetOptions says what each means)
  int64_t image_size = 224, resize_size = 256;
  bool skip_bad_files = false, exif_transpose = false, dct_scaling = false;
  std::string train_list, val_list;
  /// Whether the dataset holds token windows for a language model (data::DatasetInfo::language).
  bool isLanguage() const;
};

/// DeepSpeed's `activation_checkpointing` section. Present: the language model checkpoints every
/// block (model.checkpoint_every, when set, says how many blocks per segment).
struct ActivationCheckpointingConfig {
  bool present = false;
  bool partition_activations = false, cpu_checkpointing = false, contiguous_memory_optimization = false,
       synchronize_checkpoint_boundary = false, profile = false;
  std::optional<int64_t> number_checkpoints;
};

/// The `cuda_graph` key: on a GPU, replay the training step as a CUDA graph (parallel/step_graph.h)
/// when the step allows it ("auto"), always (a ValueError naming why when it cannot: "true"), or
/// never ("false").
enum class CudaGraph { automatic, always, never };

struct TrainConfig {
  std::string model = "mlp";
  nn::ModelOptions model_options{};
  DataConfig data{};
  BatchSizes batch{};
  /// `optimizer` and `scheduler` as given (names and params checked by optim's registry, which
  /// builds them).
  optim::OptimizerSpec optimizer{};
  optim::SchedulerSpec scheduler{};
  /// The largest global gradient L2 norm; 0: off. Omitted: DeepSpeed's default, 1.0
  /// (runtime/constants.py GRADIENT_CLIPPING_DEFAULT in DeepSpeed 0.19).
  double gradient_clipping = 1.0;
  /// fp32, or bf16 / fp16 from DeepSpeed's bf16.enabled / fp16.enabled (autocast training).
  parallel::Precision precision = parallel::Precision::fp32;
  /// The fp16 section's loss-scale keys (DeepSpeed's meanings); set when fp16 is enabled.
  std::optional<optim::LossScalerOptions> loss_scaler;
  /// fp16.auto_cast: cast the model's input to fp16 too.
  bool auto_cast = false;
  /// bf16.bf16_master_weights_and_grads and bf16.bf16_optimizer_states (ZeRO stages 1-3 only): no
  /// f32 master weights, the parameters, gradients and optimizer states bf16
  /// (zero/optimizer.h's master_weights_in_param_dtype).
  bool bf16_master_weights = false;
  bool bf16_optimizer_states = false;
  /// bf16.check_grad_overflow (DeepSpeed's default true): at ZeRO stages 1 and 2 a step whose
  /// gradients hold an inf or nan is skipped (EngineOptions::skip_nonfinite_steps). DeepSpeed checks
  /// neither at stage 3 nor without ZeRO in this mode, and neither does lockstep.
  bool bf16_check_grad_overflow = true;
  /// DeepSpeed's torch_autocast (bfloat16) without a bf16 section: precision bf16 with f32
  /// parameters, gradients and optimizer states at every ZeRO stage (no master weights).
  bool torch_autocast = false;
  int64_t steps_per_print = 10;
  int64_t epochs = 1;
  int64_t max_steps = 0;  // 0: no limit
  uint64_t seed = 1;
  std::string checkpoint_dir;  // empty: OUTPUT/checkpoints
  int64_t checkpoint_every_steps = 0;
  int checkpoint_keep_last = 3;
  int64_t eval_every_epochs = 1;
  /// eval.every_steps: a validation pass also every so many optimizer steps (nanoGPT's
  /// eval_interval: a language model trains less than an epoch); 0: epochs' ends only.
  int64_t eval_every_steps = 0;
  MonitorConfig tensorboard{}, csv_monitor{};
  std::string backend = "auto";  // a name from comm::backendNames(), checked when parsed
  /// Where the model trains: `device: cpu`, `cuda:N` (one rank) or `cuda`, which sets
  /// device_per_local_rank: each rank trains on cuda:LOCAL_RANK (device says cuda:0 until the rank
  /// picks its own).
  Device device = Device::cpu();
  bool device_per_local_rank = false;
  CudaGraph cuda_graph = CudaGraph::automatic;
  /// The `backends` section (config_backends.h): torch.backends' GPU math switches (deterministic
  /// cuDNN algorithms, cuDNN benchmarking, TF32 in convolutions and matmuls), set in every rank
  /// before training. No effect on a CPU run.
  kernels::GpuMathOptions gpu_math{};
  /// `comm_timeout_seconds`: the collective timeout (torch's init_process_group(timeout=),
  /// torchtitan's comm.train_timeout_seconds); unset: LOCKSTEP_TIMEOUT, else 5 minutes. Also the
  /// agent's watchdog timeout when `lockstep train --nproc-per-node` starts the ranks.
  std::optional<double> comm_timeout_seconds;
  /// The `ddp` section: DistributedDataParallel's options (PyTorch's keyword names), used on
  /// several ranks.
  parallel::DistributedDataParallelOptions ddp{};
  /// The `zero_optimization` section (zero_config.h): ZeRO stage 0 (DDP), 1, 2 or 3 and its options.
  ZeroConfig zero{};
  /// The `pipeline` section (pipeline_config.h): the model cut into stages across the ranks; the
  /// batch sizes then count data-parallel replicas (world / stages), not ranks.
  PipelineConfig pipeline{};
  /// The whole config document as parsed, --set overrides applied (a checkpoint's config.json).
  nlohmann::json document = nlohmann::json::object();
  /// CRC-32 (8 hex digits) of `document` less the keys that say how long, how often and where a
  /// run trains (epochs, max_steps, steps_per_print, checkpoint, eval, tensorboard, csv_monitor,
  /// backend, device, backends, data.num_workers, zero_optimization, pipeline) and the seed (compared apart):
  /// two runs with the same hash and seed train the same model, so one may resume the other's checkpoints
  /// (run_identity.h).
  std::string identity_hash;
  ActivationCheckpointingConfig activation_checkpointing{};
  /// Lines the run logs once: DeepSpeed keys accepted at their default or off value, with no
  /// effect in lockstep (deepspeed_keys.h).
  std::vector<std::string> notes;
  /// What to sample from a language model at the end (`sample` section).
  struct Sample {
    std::string prompt = "\n";
    int64_t max_new_tokens = 200;
    double temperature = 0.8;
    int64_t top_k = 40;
  } sample{};
};

/// Parses `text` (YAML or JSON), applies `overrides` ("a.b=value", value a YAML scalar or flow
/// node) and resolves for `world_size` ranks. ValueError on any unknown or unsupported key, wrong
/// type, or inconsistent value; `source` names the file in messages.
TrainConfig parseTrainConfig(const std::string& text, const std::vector<std::string>& overrides,
                             int64_t world_size, const std::string& source = "config");

/// Reads the file and calls parseTrainConfig; ValueError naming the path when it cannot be read.
TrainConfig loadTrainConfig(const std::string& path, const std::vector<std::string>& overrides,
                            int64_t world_size);

}  // namespace lockstep::train
