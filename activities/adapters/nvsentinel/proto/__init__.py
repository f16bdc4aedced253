"""NVSentinel's health-event interface, generated from goodput's copy of its .proto (beside this file).

The interface (package `datamodels`, service `PlatformConnector`) is NVSentinel's, Apache License 2.0;
see the header of health_event.proto. Regenerate with scripts/gen_nvsentinel_proto.sh; do not edit
the generated `health_event_pb2*` modules by hand.
"""
