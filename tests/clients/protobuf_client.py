"""Protobuf through a schema registry as Confluent's own Python client does it (confluent-kafka's
ProtobufSerializer, which speaks the registry's REST API and registers the files a schema
imports as references), for tests/kafka_schemas.rs.

    protobuf_client.py produce --bootstrap B --topic T --descriptors SET --message NAME --records JSON
                               (--registry URL | --raw)
        SET:        a FileDescriptorSet (protoc --include_imports --descriptor_set_out)
        NAME:       the message type, e.g. demo.Bid; each record is its JSON mapping
        --registry: serialized by ProtobufSerializer (the schema registered under T-value); prints its id
        --raw:      bare messages (ENCODE PROTOBUF (schema.location = ...))

The message classes are made at run time from the descriptors (no generated code), as
Python's protobuf runtime allows.
"""

import argparse
import json
import struct

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory


def message_class(descriptors, name):
    files = descriptor_pb2.FileDescriptorSet()
    with open(descriptors, "rb") as f:
        files.ParseFromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def produce(args):
    cls = message_class(args.descriptors, args.message)
    messages = [json_format.ParseDict(record, cls()) for record in json.loads(args.records)]
    producer = Producer({"bootstrap.servers": args.bootstrap})
    if args.registry:
        serializer = ProtobufSerializer(cls, SchemaRegistryClient({"url": args.registry}),
                                        {"use.deprecated.format": False})
        context = SerializationContext(args.topic, MessageField.VALUE)
        values = [serializer(m, context) for m in messages]
        if values:
            print(struct.unpack(">I", values[0][1:5])[0])
    else:
        values = [m.SerializeToString() for m in messages]
    for value in values:
        producer.produce(args.topic, value)
    producer.flush(30)


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("produce")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--descriptors", required=True)
    p.add_argument("--message", required=True)
    p.add_argument("--records", required=True)
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--registry")
    how.add_argument("--raw", action="store_true")
    args = parser.parse_args()
    produce(args)


if __name__ == "__main__":
    main()
