"""Reads a TensorBoard event file with Google's protobuf library (Debian's python3-protobuf),
independently of the Go package: the TFRecord framing with both masked CRC-32C checksums, and
each record parsed as tensorflow.Event, whose descriptor is built here with the field numbers
and types of tensorflow/core/util/event.proto and core/framework/summary.proto. Prints one JSON
object per event. Used by TestWriterPythonProtobuf; usage: read_events.py FILE
"""
import json
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def event_class():
    fd = descriptor_pb2.FileDescriptorProto(name="event_subset.proto", package="tensorflow", syntax="proto3")
    summary = fd.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    value.field.add(name="node_name", number=7, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    value.field.add(name="tag", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL, oneof_index=0)
    value.oneof_decl.add(name="value")
    summary.field.add(name="value", number=1, type=F.TYPE_MESSAGE, type_name=".tensorflow.Summary.Value", label=F.LABEL_REPEATED)
    event = fd.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL, oneof_index=0)
    event.field.add(name="graph_def", number=4, type=F.TYPE_BYTES, label=F.LABEL_OPTIONAL, oneof_index=0)
    event.field.add(name="summary", number=5, type=F.TYPE_MESSAGE, type_name=".tensorflow.Summary", label=F.LABEL_OPTIONAL, oneof_index=0)
    event.oneof_decl.add(name="what")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    desc = pool.FindMessageTypeByName("tensorflow.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def main(path):
    Event = event_class()
    data = open(path, "rb").read()
    off = 0
    while off < len(data):
        (n,) = struct.unpack_from("<Q", data, off)
        (lcrc,) = struct.unpack_from("<I", data, off + 8)
        if lcrc != masked(data[off:off + 8]):
            sys.exit("byte %d: length checksum" % off)
        body = data[off + 12:off + 12 + n]
        (dcrc,) = struct.unpack_from("<I", data, off + 12 + n)
        if dcrc != masked(body):
            sys.exit("byte %d: data checksum" % off)
        ev = Event()
        ev.ParseFromString(body)
        if ev.UnknownFields() if hasattr(ev, "UnknownFields") else False:
            sys.exit("byte %d: unknown fields" % off)
        out = {"wall_time": ev.wall_time, "step": ev.step, "what": ev.WhichOneof("what")}
        if out["what"] == "file_version":
            out["file_version"] = ev.file_version
        if out["what"] == "summary":
            out["values"] = [[v.tag, v.simple_value] for v in ev.summary.value]
        print(json.dumps(out))
        off += 12 + n + 4


if __name__ == "__main__":
    main(sys.argv[1])
