"""fatune.tune and fatune.best over the database the command uses (the
fatune command shipped with the package), on the emulator: one small
problem, then the best of it, then fatune.attention runs that variant."""
import numpy as np
import pytest

import fatune


def test_best_of_nothing(tmp_path):
    assert fatune.best(dim=16, seq=32, dtype="fp32", db=str(tmp_path / "none.db")) is None


def test_tune_then_best(tmp_path):
    db = str(tmp_path / "tune.db")
    rows = fatune.tune(dim=16, seq=32, dtype="fp32", batch=1, heads=1, backend="emu", db=db)
    ok = [r for r in rows if r["status"] == "ok"]
    assert ok and all(r["dim"] == 16 and r["backend"] == "emu" for r in rows)
    b = fatune.best(dim=16, seq=32, dtype="fp32", db=db)
    assert b["exact"] and b["variant"] in {r["name"] for r in ok}
    q = np.zeros((1, 1, 32, 16), np.float32)
    assert fatune.plan(q, q, q, db=db) == b["variant"]


@pytest.mark.parametrize("kw,arg", [(dict(dim=0), "dim"), (dict(dtype="fp8"), "dtype"),
                                    (dict(backend="tpu"), "backend"), (dict(batch=True), "batch")])
def test_tune_bad_arguments(kw, arg):
    with pytest.raises(ValueError, match="^%s: " % arg):
        fatune.tune(**kw)


def test_command_error_is_fatune_error(tmp_path):
    with pytest.raises(fatune.Error, match="dim"):
        fatune.tune(dim=600, seq=32, dtype="fp32", backend="emu", db=str(tmp_path / "x.db"))
