"""dnnroofline.perfmodel.replay: a GPU step's host and device timelines, by hand."""

from __future__ import annotations

import pytest

from dnnroofline.perfmodel.replay import Issue, replay


def test_a_device_bound_step_is_the_devices_work():
    ops = [Issue(1e-6, 1e-3)] * 10  # each issued in 1 us, 1 ms of kernel
    r = replay(ops)
    assert r.step_s == pytest.approx(10e-3)
    assert r.busy_share == pytest.approx(1.0)


def test_a_host_bound_step_is_the_hosts_issue_time_and_the_device_waits():
    ops = [Issue(1e-3, 1e-6)] * 10  # each issued in 1 ms, 1 us of kernel
    r = replay(ops)
    assert r.step_s == pytest.approx(10e-3)
    assert r.busy_share == pytest.approx(10e-6 / 10e-3)


def test_the_steady_state_overlaps_the_next_steps_host_work_with_this_steps_kernels():
    # the first op's issue (5 ms) and a long kernel (10 ms): in the steady state the host
    # issues the next step while the device still runs this one: 10 ms, not 15
    ops = [Issue(5e-3, 0.0), Issue(0.0, 10e-3)]
    assert replay(ops, steps=1).step_s == pytest.approx(15e-3)  # from an idle device
    assert replay(ops).step_s == pytest.approx(10e-3)


def test_a_sync_drains_the_device_before_the_host_goes_on():
    # 10 ms of kernels, then the host reads a value back (sync) and spends 4 ms before
    # issuing the last kernel (2 ms): 10 + 4 + 2, nothing overlaps across the sync
    ops = [Issue(1e-6, 10e-3), Issue(4e-3, 0.0, sync=True), Issue(1e-6, 2e-3)]
    assert replay(ops).step_s == pytest.approx(16e-3, rel=1e-3)
    # without the sync the host's 4 ms hide under the 10 ms of kernels
    free = [Issue(1e-6, 10e-3), Issue(4e-3, 0.0), Issue(1e-6, 2e-3)]
    assert replay(free).step_s == pytest.approx(12e-3, rel=1e-3)


def test_a_step_without_ops_is_refused():
    with pytest.raises(ValueError, match="without ops"):
        replay([])
