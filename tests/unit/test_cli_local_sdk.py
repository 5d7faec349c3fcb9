"""The local stack finds the emulators where gcloud's own SDK is, not only at the Debian path.

A stand-in ``gcloud`` on PATH (a shell script answering ``gcloud info --format=...`` with a temp
directory) plays an SDK installed elsewhere - by the installer in a home directory, or Homebrew.
"""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from pubsub_toolkit_local import emulators, sdk


def fake_sdk(root: Path, *components: str) -> Path:
    """An SDK root holding ``components`` (empty files where the real ones are)."""
    for relative in components:
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("#!/bin/sh\n")
        target.chmod(target.stat().st_mode | stat.S_IEXEC)
    return root


def fake_gcloud(bin_dir: Path, sdk_root: Path) -> None:
    """A ``gcloud`` that reports ``sdk_root`` as its installation's, as the real one does."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "gcloud"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = info ] && [ "$2" = "--format=value(installation.sdk_root)" ]; then\n'
        f"  echo '{sdk_root}'\n"
        "  exit 0\n"
        "fi\n"
        "exit 1\n"
    )
    script.chmod(0o755)


@pytest.fixture(autouse=True)
def fresh_lookup(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(sdk.SDK_ROOT_VARIABLE, raising=False)
    sdk.gcloud_sdk_root.cache_clear()
    yield
    sdk.gcloud_sdk_root.cache_clear()


def test_the_emulators_are_found_under_the_sdk_root_gcloud_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = fake_sdk(tmp_path / "home-sdk", sdk.PUBSUB_LAUNCHER, sdk.FIRESTORE_JAR)
    fake_gcloud(tmp_path / "bin", root)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    assert sdk.sdk_roots()[0] == root
    pubsub = emulators.pubsub_emulator(8999, tmp_path / "work")
    assert pubsub.argv[0] == str(root / sdk.PUBSUB_LAUNCHER)
    firestore = emulators.firestore_emulator(8998, tmp_path / "work")
    assert str(root / sdk.FIRESTORE_JAR) in firestore.argv


def test_the_variable_comes_first_then_gcloud_then_the_packaged_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = fake_sdk(tmp_path / "chosen", sdk.PUBSUB_LAUNCHER)
    reported = fake_sdk(tmp_path / "reported", sdk.PUBSUB_LAUNCHER)
    fake_gcloud(tmp_path / "bin", reported)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    monkeypatch.setenv(sdk.SDK_ROOT_VARIABLE, str(chosen))
    assert sdk.sdk_roots() == [chosen, reported, sdk.PACKAGED_SDK]
    assert sdk.pubsub_launcher() == chosen / sdk.PUBSUB_LAUNCHER
    # A root without the component is passed over for the next one that has it.
    monkeypatch.setenv(sdk.SDK_ROOT_VARIABLE, str(tmp_path / "empty"))
    assert sdk.pubsub_launcher() == reported / sdk.PUBSUB_LAUNCHER


def test_a_missing_emulator_names_every_root_tried_and_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reported = fake_sdk(tmp_path / "reported")  # gcloud without the component
    fake_gcloud(tmp_path / "bin", reported)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    monkeypatch.setattr(sdk, "PACKAGED_SDK", tmp_path / "no-package")
    with pytest.raises(sdk.ServiceStartError) as refused:
        emulators.firestore_emulator(8998, tmp_path / "work")
    assert str(refused.value) == (
        f"Firestore emulator not found under {reported}, {tmp_path / 'no-package'}: gcloud "
        "components install cloud-firestore-emulator (or the Debian package "
        "google-cloud-cli-firestore-emulator), or set PUBSUB_TOOLKIT_SDK_ROOT to the SDK's root"
    )


def test_a_gcloud_that_cannot_answer_leaves_the_other_roots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "bin" / "gcloud"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    assert sdk.sdk_roots() == [sdk.PACKAGED_SDK]
