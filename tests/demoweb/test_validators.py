"""The synthetic web's conditional-request rule (RFC 9110 section 13.2.2), pure."""

from __future__ import annotations

from crawlstream.devtools.demoweb import WebModel
from crawlstream.devtools.demoweb._model import not_modified

LM = WebModel.last_modified(0)


def test_if_none_match_decides_when_present_with_weak_comparison() -> None:
    assert not_modified('W/"a", "b"', None, '"b"', None)
    assert not_modified('"a"', None, 'W/"a"', None)
    assert not_modified("*", None, '"x"', None)
    assert not not_modified('"a"', LM, '"b"', WebModel.last_modified_s(0))  # If-Modified-Since ignored
    assert not not_modified('"a"', None, None, None)


def test_if_modified_since_compares_with_last_modified() -> None:
    assert not_modified(None, LM, None, WebModel.last_modified_s(0))
    assert not not_modified(None, LM, None, WebModel.last_modified_s(1))
    assert not not_modified(None, "not a date", None, WebModel.last_modified_s(0))
    assert not not_modified(None, None, '"a"', WebModel.last_modified_s(0))


def test_which_pages_change_and_which_validators_they_send() -> None:
    model = WebModel(n_domains=2, pages_per_domain=6, changing_every=2)
    host = model.domains[1]
    assert [model.validator_kinds(host, f"/p/{k}") for k in range(3)] == [(True, True), (False, True), (False, False)]
    assert [model.changes(host, f"/p/{k}") for k in range(4)] == [True, False, True, False]
    assert not model.changes(host, "/")
    assert not WebModel(n_domains=2).changes(host, "/p/0")  # off by default
