"""The real servers start, answer, and stop."""

from __future__ import annotations

import sqlalchemy


def test_redis_answers(redis_server):
    import redis

    client = redis.Redis.from_url(redis_server.url)
    assert client.ping()


def test_postgres_answers(postgres):
    engine = sqlalchemy.create_engine(postgres.url)
    with engine.connect() as conn:
        assert conn.execute(sqlalchemy.text("select 1")).scalar() == 1
    engine.dispose()


def test_kafka_round_trip(kafka):
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=kafka.url)
    producer.send("smoke", b"hello").get(timeout=20)
    producer.close()
    consumer = KafkaConsumer(
        "smoke",
        bootstrap_servers=kafka.url,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10000,
    )
    assert b"hello" in [message.value for message in consumer]
    consumer.close()
