"""The CPU's cost of outputs in pages fresh from the OS (dnnroofline.measure.fresh_pages):
measured, recorded per op by the inventory and the sweep, charged by the model."""

from __future__ import annotations

import copy

import pytest
import torch
from test_predict import INVENTORY, host_costs, machine

from dnnroofline.errors import InputError
from dnnroofline.estimate import op_rules
from dnnroofline.estimate.op_inventory import op_inventory
from dnnroofline.measure import fresh_pages
from dnnroofline.perfmodel import op_class_tables as oct_
from dnnroofline.perfmodel import predict as pr

MIB = 2**20
# 0.3 ms per MiB above 32 MiB (as glibc maps a block over its threshold from the OS on
# every allocation); a write of kept memory at 10 GB/s
PER_BYTE = 0.3e-3 / MIB


def probes(mib_sizes, threshold_mib=32, per_byte=PER_BYTE, noisy=()):
    out = []
    for mib in mib_sizes:
        kept = mib * MIB / 1e10
        pays = mib >= threshold_mib and mib not in noisy
        out.append({"bytes": mib * MIB, "fresh_s": kept + (per_byte * mib * MIB if pays else 0),
                    "kept_s": kept})  # fmt: skip
    return out


def test_the_fit_finds_the_smallest_size_that_pays_and_its_cost_per_byte():
    threshold, per_byte = fresh_pages.fit(probes([1, 2, 4, 8, 16, 24, 32, 48, 96]))
    assert threshold == 32 * MIB and per_byte == pytest.approx(PER_BYTE)
    # a size below the threshold that paid by chance (noise) is not the threshold: every
    # larger size must pay too
    threshold, _ = fresh_pages.fit(
        probes([1, 2, 4, 8, 16, 24, 32, 48, 96], threshold_mib=2, noisy=(8,))
    )
    assert threshold == 16 * MIB
    # nothing pays (an allocator that keeps its blocks): no charge at all
    assert fresh_pages.fit(probes([1, 16, 96], per_byte=0.0)) == (None, 0.0)
    assert fresh_pages.fit([]) == (None, 0.0)


def test_the_charge_counts_only_outputs_at_or_above_the_threshold():
    block = {"threshold_bytes": 32 * MIB, "s_per_byte": PER_BYTE}
    assert fresh_pages.seconds([144 * MIB, 32 * MIB, 31 * MIB], block) == pytest.approx(
        PER_BYTE * 176 * MIB
    )
    assert fresh_pages.seconds([144 * MIB], None) == 0.0
    assert fresh_pages.seconds([144 * MIB], {"threshold_bytes": None, "s_per_byte": 0.0}) == 0.0


def test_measured_on_this_host_the_block_is_its_own_fit():
    block = fresh_pages.measure(torch, reps=2, probe_mib=(1, 8, 48))
    sizes = [p["bytes"] for p in block["probes"]]
    assert sizes == sorted(sizes) and sizes[0] == MIB and sizes[-1] == 48 * MIB
    assert (block["threshold_bytes"], block["s_per_byte"]) == fresh_pages.fit(block["probes"])
    assert block["s_per_byte"] >= 0 and "fastest of 2 writes" in block["method"]


def test_an_op_s_fresh_outputs_are_what_it_allocated_not_what_it_wrote_in_place():
    a, b = torch.ones(2**19), torch.ones(2**19)  # 2 MiB each
    assert op_rules.fresh_outputs(a + b, [a, b]) == [2 * MIB]
    assert op_rules.fresh_outputs(a.add_(b), [a, b]) == []
    assert op_rules.fresh_outputs((a + b, a[:10] * 2), [a, b]) == [2 * MIB]  # 40 B left out
    assert op_rules.fresh_outputs(a.view(-1), [a]) == []


def test_the_inventory_records_the_large_blocks_of_alexnets_step():
    inv = op_inventory("alexnet", precision="fp32", batch_size=2, image_size=64)
    fc1 = 9216 * 4096 * 4  # alexnet's first fully connected weight: 144 MiB
    mm = [o for o in inv["ops"] if o["name"] == "aten.mm.default" and o["phase"] == "backward"]
    assert any(o.get("fresh_bytes") == [fc1] for o in mm)  # its weight gradient
    decay = [o for o in inv["ops"] if o["phase"] == "optimizer" and o["name"] == "aten.add.Tensor"]
    assert any(o.get("fresh_bytes") == [fc1] for o in decay)  # SGD's grad + wd * param
    in_place = [o for o in inv["ops"] if o["name"].split(".")[1].endswith("_")]
    assert in_place and not any(o.get("fresh_bytes") for o in in_place)


BLOCK = {"threshold_bytes": 32 * MIB, "s_per_byte": PER_BYTE}


def test_the_model_charges_each_op_s_large_fresh_outputs_on_a_cpu_only():
    inventory = copy.deepcopy(INVENTORY)
    inventory["ops"][1]["fresh_bytes"] = [40 * MIB]  # the ReLU, 3 calls
    charged = 3 * PER_BYTE * 40 * MIB
    host = host_costs()
    plain = pr.predict_step(inventory, machine("cpu", host), "fp32")
    paged = pr.HostCosts(host.per_op, host.fixed_s, None, BLOCK)
    p = pr.predict_step(inventory, machine("cpu", paged), "fp32")
    assert p.step_s - plain.step_s == pytest.approx(charged)
    assert [o.fresh_s for o in p.ops] == pytest.approx([0.0, charged])
    # a CUDA tensor comes from torch's caching allocator: nothing is charged there
    gpu = pr.HostCosts(host.per_op, host.fixed_s, 1e-6, BLOCK)
    assert all(o.fresh_s == 0 for o in pr.predict_step(inventory, machine("cuda", gpu), "fp32").ops)
    inventory["ops"][1]["fresh_bytes"] = ["40 MiB"]
    with pytest.raises(InputError, match=r"toy: ops\[1\]\.fresh_bytes must be a list of byte"):
        pr.inventory_ops(inventory, "toy")


def efficiency_doc(fresh_block, row_fresh):
    row = {"phase": "forward", "shape": {"numel": 2**24}, "flops": 2**24, "bytes": 3 * 2**26,
           "seconds": 0.03, "ideal_s": 0.02, "efficiency": 0.02 / 0.03,
           "fresh_bytes": row_fresh}  # fmt: skip
    dispatch = {"host_s": {}, "bare_s": {"elementwise": 1e-3}, "fresh_pages": fresh_block}
    return {"device": "cpu", "roofs": {"compute": {"fp32": 1e11}, "memory": 1e10},
            "dispatch": dispatch, "tables": {"fp32": {"elementwise": [row]}}}  # fmt: skip


def test_a_swept_op_s_efficiency_leaves_out_its_host_call_and_its_fresh_pages():
    tables = oct_.load_tables(efficiency_doc(BLOCK, [48 * MIB]), "eff.json")
    row = tables.rows["fp32"]["elementwise"][0]
    assert row["efficiency"] == pytest.approx(0.02 / (0.03 - 1e-3 - PER_BYTE * 48 * MIB))
    small = oct_.load_tables(efficiency_doc(BLOCK, [16 * MIB]), "eff.json")
    assert small.rows["fp32"]["elementwise"][0]["efficiency"] == pytest.approx(0.02 / 0.029)


@pytest.mark.parametrize(
    "block, row_fresh, message",
    [
        ({"threshold_bytes": "32 MiB", "s_per_byte": 1e-10}, [],
         r"eff\.json: dispatch\.fresh_pages\.threshold_bytes must be a byte count or null"),
        ({"threshold_bytes": 2**25, "s_per_byte": -1.0}, [],
         r"eff\.json: dispatch\.fresh_pages\.s_per_byte must be seconds per byte"),
        ("fast", [], r"eff\.json: dispatch\.fresh_pages must be an object or null"),
        (BLOCK, [-1], r"eff\.json: tables\.fp32\.elementwise\[0\]\.fresh_bytes must be a list"),
    ],
)  # fmt: skip
def test_a_bad_fresh_pages_block_or_row_is_refused_naming_its_key(block, row_fresh, message):
    with pytest.raises(InputError, match=message):
        oct_.load_tables(efficiency_doc(block, row_fresh), "eff.json")
