"""The memory bus: typed messages on MQTT-style topics between the supervisor, agents and workers.

    messages.py      the message types (pydantic, frozen) and their JSON wire form
    port.py          the Bus and Subscription protocols, topic matching (``+``, ``#``, ``$share``)
    inproc.py        InProcessBus on bounded anyio memory streams, the default backend
    replies.py       Replies: awaited answers by key (the bus archive's replies, a worker's grants)
    rpc.py           RequestClient, RequestServer: a worker's calls to a job's process (archive,
                     knowledge) with retries, errors that keep their kind, bounded concurrency
    mqtt.py          MQTTBus over an MQTT 5 broker (mosquitto) through aiomqtt, for bus.url
    mqtt_link.py     its connection: bus.url parsing, the adapter over aiomqtt and paho (pinned)
    mqtt_routing.py  its fan-out to local subscriptions, and the deliveries it refuses

Backends are picked by the composition root only; everything else speaks to ``port.Bus``. The
contract every backend must pass lives in ``gliding.testing.bus_contract``.
"""
