"""Where the system model (``fedsim.sim``) and the learning side (``fedsim.learn``) meet: the
World whose primitives algorithms speak, and the parts it is built from."""

from fedsim.world.tasks import Task
from fedsim.world.world import Client, World

__all__ = ["Client", "Task", "World"]
