# Runs DeepSpeed 0.19's own loss-scale updates, DynamicLossScaler.update_scale (ZeRO stages 1-3)
# and FP16_Optimizer._update_scale (no ZeRO), on the sequences of loss_scaler_test.cpp and prints
# the state after each update: where the test's expected values come from. With the bench venv's
# DeepSpeed (bench/ installs it; CPU only):
#   build/bench-venv/bin/python tests/optim/deepspeed_loss_scaler_oracle.py
import types
import deepspeed.runtime.fp16.loss_scaler as ls
from deepspeed.runtime.fp16.fused_optimizer import FP16_Optimizer
ls.dist = types.SimpleNamespace(get_rank=lambda: 0)
from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler
def run(seq, **kw):
    kw = dict(dict(min_scale=1, consecutive_hysteresis=False), **kw)
    s = DynamicLossScaler(**kw)
    out = []
    for o in seq:
        try:
            s.update_scale(o)
        except Exception as e:
            out.append('raise'); break
        out.append((s.cur_scale, s.cur_hysteresis, s.last_overflow_iter, s.cur_iter))
    return out
def run_fp16_optimizer(seq, init_scale, scale_window, min_scale=1):
    cfg = types.SimpleNamespace(dynamic_loss_scale=True, cur_scale=init_scale, scale_factor=2.0,
                                min_loss_scale=min_scale, last_overflow_iter=-1, cur_iter=0, scale_window=scale_window)
    me = types.SimpleNamespace(loss_scale_config=cfg, verbose=False)
    out = []
    for o in seq:
        FP16_Optimizer._update_scale(me, o)
        out.append((cfg.cur_scale, cfg.last_overflow_iter, cfg.cur_iter))
    return out
cases = {
 'hyst2': ([1,1,1,0,1,1], dict(init_scale=2**16, scale_window=1000, delayed_shift=2)),
 'window3': ([0,0,0,0,0,0,1,0,0,0,0], dict(init_scale=8, scale_window=3, delayed_shift=1)),
 'minfloor': ([1,1,1,1], dict(init_scale=8, scale_window=1000, min_scale=2, delayed_shift=1, raise_error_at_min_scale=False)),
 'minraise': ([1,1,1,1], dict(init_scale=8, scale_window=1000, min_scale=2, delayed_shift=1)),
 'minfloor3': ([1,1], dict(init_scale=3, scale_window=1000, min_scale=2, delayed_shift=1, raise_error_at_min_scale=False)),
 'consec_off': ([1,0,1,1,0,0,0,1], dict(init_scale=64, scale_window=4, delayed_shift=2, consecutive_hysteresis=False)),
 'consec_on':  ([1,0,1,1,0,0,0,1], dict(init_scale=64, scale_window=4, delayed_shift=2, consecutive_hysteresis=True)),
}
for k,(seq,kw) in cases.items():
    print(k, [bool(x) for x in seq], run([bool(x) for x in seq], **kw))
print('fp16_optimizer', run_fp16_optimizer([bool(x) for x in [0,0,0,0,1,1,0,0,0,0,1,1,1,1]], 8, 3, 2))
