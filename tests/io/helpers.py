"""Shared helpers for the upgrade tests."""
from google.protobuf import text_format

from pycaffe_cli.io.upgrade import net_needs_upgrade, upgrade_net
from pycaffe_cli.proto import caffe_pb2


def net(text):
    return text_format.Parse(text, caffe_pb2.NetParameter())


def assert_upgrades_to(old_text, expected_text, source="old.prototxt"):
    old = net(old_text)
    before = text_format.MessageToString(old)
    upgraded = upgrade_net(old, source=source)
    assert text_format.MessageToString(upgraded) == text_format.MessageToString(
        net(expected_text))
    assert text_format.MessageToString(old) == before  # the input is left alone
    assert not net_needs_upgrade(upgraded)
    assert upgrade_net(upgraded) is upgraded  # idempotent
    return upgraded
