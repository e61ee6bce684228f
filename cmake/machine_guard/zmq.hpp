#error "a state machine (vidline_machines) must not include zmq.hpp: its shell does the actor and socket work (docs/design.md, Layers)"
