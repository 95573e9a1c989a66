"""SDN controllers (os-ken apps) and their testbed glue.

E3 (the SDN-reconfigured optical space switch, docs/e3.md):

- :mod:`controllers.fabric`: the leaf-spine's port map and the flow tables wanted for
  an OSS state (pure Python);
- :mod:`controllers.schedulers`: none / UT / DT / on-demand, pure Python with an
  injectable clock;
- :mod:`controllers.rest`: the REST API (a plain WSGI app);
- :mod:`controllers.e3_app`: the os-ken application (OpenFlow 1.3 glue);
- :mod:`controllers.runner`: ``ControllerRunner``, starting and stopping it for a run;
- :mod:`controllers.broker`: the on-demand transfer agent (REST client).
"""
