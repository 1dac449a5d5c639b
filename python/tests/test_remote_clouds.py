"""Google Cloud Storage and Azure against the real services' addresses:
their URIs, their options and their errors without credentials (nothing
reaches the real services, and no secret ever appears in a message). Reads
from GCS's emulator are in test_remote_gcs.py; no Azure emulator runs
here."""

import pytest

import loaderx

SECRET = "c2VjcmV0LXRoYXQtbXVzdC1uZXZlci1zaG93"  # base64, as an account key is

# Short budgets: a request that cannot reach a service fails fast.
FAST = {"max_retries": "0", "retry_timeout": "2s", "timeout": "2s", "connect_timeout": "1s"}


def test_unknown_option_keys_are_named_for_each_cloud():
    for uri, good in (
        ("gs://bucket/t", {}),
        ("az://container/t", {"azure_storage_account_name": "acct"}),
        ("abfss://fs@acct.dfs.core.windows.net/t", {}),
        ("https://example.invalid/t", {}),
    ):
        with pytest.raises(ValueError) as e:
            loaderx.open_table(uri, storage_options={**good, "no_such_key": SECRET})
        assert "no_such_key" in str(e.value), uri
        assert SECRET not in str(e.value), uri


def test_azure_without_an_account_is_refused_naming_the_uri():
    with pytest.raises(ValueError) as e:
        loaderx.open_table("az://container/t", storage_options=FAST)
    assert "az://container/t" in str(e.value)


def test_a_malformed_service_account_key_is_refused_without_its_content():
    key = f'{{"type": "service_account", "private_key": "{SECRET}"}}'
    with pytest.raises((ValueError, OSError)) as e:
        loaderx.open_table(
            "gs://bucket/t", storage_options={**FAST, "google_service_account_key": key}
        )
    assert SECRET not in str(e.value)
    assert "gs://bucket/t" in str(e.value)


@pytest.mark.parametrize(
    "uri, options",
    [
        (
            "az://container/t",
            {"azure_storage_account_name": "loaderxtest", "azure_storage_account_key": SECRET},
        ),
        ("gs://loaderx-test-bucket/t", {"google_service_account": "/nonexistent/key.json"}),
    ],
)
def test_an_unreachable_service_fails_fast_naming_the_object(uri, options, monkeypatch):
    # No credentials from this machine's environment get involved.
    for var in ("GOOGLE_APPLICATION_CREDENTIALS", "AZURE_STORAGE_ACCOUNT_KEY"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises((OSError, ValueError)) as e:
        loaderx.open_table(uri, storage_options={**FAST, **options})
    text = str(e.value)
    assert uri.removesuffix("/t") in text, text
    assert SECRET not in text
