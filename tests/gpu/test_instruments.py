"""GPU: the occupancy calculator against the driver (every rung, the family default, and 60 tuner
configs); the peak and bandwidth probes return sane numbers."""

import pytest

from tilegemm import autotune, gpu, occupancy, registry
from tilegemm.instruments import probe

pytestmark = pytest.mark.gpu


def _ours(spec, params, resources, limits):
    return occupancy.occupancy(spec.threads(params), resources.registers,
                               resources.shared_bytes + spec.smem(params), limits).blocks


def _limits():
    return occupancy.Limits.from_props(gpu.device_properties())


@pytest.mark.parametrize("name", sorted(registry.RUNGS) + ["gemm"])
def test_occupancy_matches_driver_for_every_rung(cp, name):
    spec, limits = registry.get(name), _limits()
    params = spec.params()
    res = spec.compile(params, arch=gpu.device_properties().arch).resources
    assert _ours(spec, params, res, limits) == probe.driver_occupancy(spec, params)


def test_occupancy_matches_driver_for_tuner_configs(cp):
    limits = _limits()
    arch = gpu.device_properties().arch
    cfgs = autotune.enumerate_configs(limits)
    step = max(1, len(cfgs) // 60)
    sample = cfgs[::step][:60]
    assert len(sample) >= 50
    autotune.compile_all(sample, ["NN"], arch)  # fill the disk cache in parallel
    F = registry.FAMILY
    mismatches = []
    for cfg in sample:
        p = F.params(cfg)
        res = F.compile(F.compiled_params(p), arch=arch).resources
        ours, drv = _ours(F, p, res, limits), probe.driver_occupancy(F, F.compiled_params(p))
        if ours != drv:
            mismatches.append((cfg, res.registers, ours, drv))
    assert not mismatches, mismatches


def test_bandwidth_probe_is_plausible(cp):
    dram = probe.bandwidth(256 << 20, 1)
    l2 = probe.bandwidth(8 << 20, 16)
    assert 100 < dram < 20000 and dram < l2 < 100000


def test_fp32_peak_is_plausible(cp):
    peak = probe.fp32_peak(iters=1024)
    assert 1 < peak < 1000  # TFLOPS


def test_explain_measures_the_build_dispatch_runs(cp):
    """explain on this GPU: the driver's blocks an SM of the build dispatch runs (at builds.ARCH_MINB's
    minb where the arch names one: 128 x 64 summed), equal to the report's own occupancy."""
    from tilegemm import builds
    from tilegemm.instruments import explain

    cfg = {**builds.TILES["128x64"], "sk": 2, "splits": 3}
    r = explain.build("gemm", cfg, shape=(2048, 1024, 2048), measure=True)
    assert r["measured"]["driver_blocks_per_sm"] == r["occupancy"]["blocks"]
    assert r["measured"]["rel_err"] < 1e-5
    if r["built_minb"] is not None:
        assert r["occupancy"]["blocks"] == r["built_minb"]
