"""Avro through a schema registry as Confluent's own Python client does it (confluent-kafka's
AvroSerializer and AvroDeserializer, which speak the registry's REST API), for tests/kafka_avro.rs.

    avro_client.py produce --bootstrap B --topic T --schema JSON --records JSON (--registry URL | --id N | --raw)
        --registry: serialized by AvroSerializer (the schema registered under T-value); prints its id
        --id N:     Confluent framing with id N written here (for a registry that is down)
        --raw:      bare Avro bodies (ENCODE AVRO (schema = '...'))
    avro_client.py register --registry URL --subject S --schema JSON    # prints the id
    avro_client.py subjects --registry URL                               # prints them, a JSON list
    avro_client.py consume --bootstrap B --topic T --registry URL --count N
        reads N messages read_committed and prints each as a JSON line {"key": ..., "value": ...}
--auth USER:PASSWORD gives the registry HTTP basic auth.
"""

import argparse
import io
import json
import struct
import sys

import fastavro
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext


def registry(args):
    config = {"url": args.registry}
    if args.auth:
        config["basic.auth.user.info"] = args.auth
    return SchemaRegistryClient(config)


def produce(args):
    records = json.loads(args.records)
    producer = Producer({"bootstrap.servers": args.bootstrap})
    if args.registry:
        serializer = AvroSerializer(registry(args), args.schema)
        context = SerializationContext(args.topic, MessageField.VALUE)
        values = [serializer(r, context) for r in records]
        if values:
            print(struct.unpack(">I", values[0][1:5])[0])
    else:
        parsed = fastavro.parse_schema(json.loads(args.schema))
        values = []
        for r in records:
            body = io.BytesIO()
            fastavro.schemaless_writer(body, parsed, r)
            frame = b"" if args.raw else b"\0" + struct.pack(">I", args.id)
            values.append(frame + body.getvalue())
    for value in values:
        producer.produce(args.topic, value)
    producer.flush(30)


def register(args):
    print(registry(args).register_schema(args.subject, Schema(args.schema, "AVRO")))


def subjects(args):
    print(json.dumps(sorted(registry(args).get_subjects())))


def consume(args):
    deserializer = AvroDeserializer(registry(args))
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "avro-client-" + args.topic,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe([args.topic])
    seen, idle = 0, 0
    while seen < args.count and idle < 30:
        m = consumer.poll(1.0)
        if m is None or m.error():
            idle += 1
            continue
        key = deserializer(m.key(), SerializationContext(args.topic, MessageField.KEY)) if m.key() else None
        value = deserializer(m.value(), SerializationContext(args.topic, MessageField.VALUE)) if m.value() else None
        print(json.dumps({"key": key, "value": value}, default=str, sort_keys=True))
        seen += 1
    consumer.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["produce", "register", "subjects", "consume"])
    parser.add_argument("--auth")
    parser.add_argument("--bootstrap")
    parser.add_argument("--topic")
    parser.add_argument("--schema")
    parser.add_argument("--records")
    parser.add_argument("--registry")
    parser.add_argument("--id", type=int)
    parser.add_argument("--raw", action="store_true")
    parser.add_argument("--subject")
    parser.add_argument("--count", type=int, default=0)
    args = parser.parse_args()
    {"produce": produce, "register": register, "subjects": subjects, "consume": consume}[args.command](args)


if __name__ == "__main__":
    main()
    sys.exit(0)
