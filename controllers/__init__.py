"""Control loops of the experiment families, and their testbed glue.

For any family:

- :mod:`controllers.process`: ``ControlProcess``, one control loop in a process of its
  own (started ledgered, health-checked by a callable or an HTTP URL, logged, stopped);
- :mod:`controllers.osken`: ``OsKenProcess``, an os-ken application as a control
  process, with the OVS bridges it drives (the app and its config come from a family).

E3 (the SDN-reconfigured optical space switch, docs/e3.md):

- :mod:`controllers.portmap`: the leaf-spine's port map and the flow tables wanted for
  an OSS state (pure Python);
- :mod:`controllers.schedulers`: none / UT / DT / on-demand, pure Python with an
  injectable clock;
- :mod:`controllers.rest`: the REST API (a plain WSGI app);
- :mod:`controllers.e3_app`: the os-ken application (OpenFlow 1.3 glue);
- :mod:`controllers.e3_process`: ``E3ControllerProcess``, the app as an ``OsKenProcess``
  for a run (its config, checked);
- :mod:`controllers.broker`: the on-demand transfer agent (REST client).
"""
