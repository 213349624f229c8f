"""A resolver plugin: the made-up NPU accelerator and PBS cluster (see docs/extending.md).

Imported by the resolver (entry point ``resolver.plugins``), never by the user's script. It holds
the NPU's probe and names the rule files and the runtime classes; the classes (which import torch)
are imported only when a run uses them.
"""

import resolver

#: The rule files, beside this module: loaded after the built-in ones.
RULES = ["rules"]

#: The runtime classes, by kind and name, imported on first use.
COMPONENTS = {
    "accelerator": {"npu": "npu_pbs_plugin.npu:NPUAccelerator"},
    "cluster_environment": {"pbs": "npu_pbs_plugin.pbs:PBSEnvironment"},
}


@resolver.register_probe("npu_device_count", default=0)
def npu_device_count(environ):
    """NPUs visible to this process (the ids in NPU_VISIBLE_DEVICES: this NPU is made up)."""
    visible = environ.get("NPU_VISIBLE_DEVICES", "")
    return len([entry for entry in visible.split(",") if entry.strip()])
