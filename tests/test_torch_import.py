"""torch's first import after rltrainer's runs with the garbage collector paused, then freezes
what it built (``rltrainer.utils.torch_import``); the collector is on again afterwards."""

from __future__ import annotations

from tests.fresh_python import python_output


def test_torch_imports_with_the_collector_paused_then_on_again() -> None:
    out = python_output(
        "import gc, sys\n"
        "import rltrainer\n"
        "assert 'torch' not in sys.modules\n"
        "imported, seen = [False], []\n"
        "gc.callbacks.append(lambda phase, info: seen.append(imported[0]))\n"
        "import torch\n"
        "imported[0] = True\n"
        "from rltrainer.utils.torch_import import _TorchImportFinder\n"
        "finders = [f for f in sys.meta_path if isinstance(f, _TorchImportFinder)]\n"
        "gc.collect()\n"
        "print(gc.isenabled(), gc.get_freeze_count() > 100_000, finders, all(seen) and bool(seen),\n"
        "      'exec_module' in vars(torch.__spec__.loader), float(torch.ones(2).sum()))\n"
    )
    # On, frozen, the finder gone, collections only after the import, torch's loader its own.
    assert out == "True True [] True False 2.0"


def test_a_collector_turned_off_by_the_user_stays_off_and_nothing_is_frozen() -> None:
    out = python_output(
        "import gc\ngc.disable()\nimport rltrainer, torch\nprint(gc.isenabled(), gc.get_freeze_count())\n"
    )
    assert out == "False 0"


def test_torch_imported_first_is_left_alone() -> None:
    out = python_output(
        "import gc, sys, torch\n"
        "import rltrainer\n"
        "from rltrainer.utils.torch_import import _TorchImportFinder\n"
        "hooked = any(isinstance(f, _TorchImportFinder) for f in sys.meta_path)\n"
        "print(gc.isenabled(), gc.get_freeze_count(), hooked)\n"
    )
    assert out == "True 0 False"
