# Runs DeepSpeed's own DynamicLossScaler.update_scale (deepspeed/runtime/fp16/loss_scaler.py at
# microsoft/DeepSpeed 38327e07f6cd39b63418f60cedd1651b0be3e7c3) on the sequences of
# loss_scaler_test.cpp and prints (cur_scale, cur_hysteresis, last_overflow_iter, cur_iter) after
# each update: where the test's expected values come from. Needs no torch or DeepSpeed install:
# put loss_scaler.py next to this file and stub its imports (torch.half, deepspeed.comm.get_rank,
# deepspeed.utils.logger), e.g. in a scratch folder:
#   git -C DeepSpeed show HEAD:deepspeed/runtime/fp16/loss_scaler.py > loss_scaler.py
#   mkdir -p torch deepspeed/utils && echo "half = 'half'" > torch/__init__.py
#   touch deepspeed/__init__.py && echo "def get_rank(): return 0" > deepspeed/comm.py
#   printf 'class _L:\n    def info(self, *a): pass\nlogger = _L()\n' > deepspeed/utils/__init__.py
from loss_scaler import DynamicLossScaler
def run(seq, **kw):
    s = DynamicLossScaler(**kw)
    out = []
    for o in seq:
        try:
            s.update_scale(o)
        except Exception as e:
            out.append('raise'); break
        out.append((s.cur_scale, s.cur_hysteresis, s.last_overflow_iter, s.cur_iter))
    return out
cases = {
 'hyst2': ([1,1,1,0,1,1], dict(init_scale=2**16, scale_window=1000, delayed_shift=2)),
 'window3': ([0,0,0,0,0,0,1,0,0,0], dict(init_scale=8, scale_window=3, delayed_shift=1)),
 'minfloor': ([1,1,1,1], dict(init_scale=8, scale_window=1000, min_scale=2, delayed_shift=1, raise_error_at_min_scale=False)),
 'minraise': ([1,1,1,1], dict(init_scale=8, scale_window=1000, min_scale=2, delayed_shift=1)),
 'minfloor3': ([1,1], dict(init_scale=3, scale_window=1000, min_scale=2, delayed_shift=1, raise_error_at_min_scale=False)),
 'consec_off': ([1,0,1,1,0,0,0,1], dict(init_scale=64, scale_window=4, delayed_shift=2, consecutive_hysteresis=False)),
 'consec_on':  ([1,0,1,1,0,0,0,1], dict(init_scale=64, scale_window=4, delayed_shift=2, consecutive_hysteresis=True)),
}
for k,(seq,kw) in cases.items():
    print(k, [bool(x) for x in seq], run([bool(x) for x in seq], **kw))
