"""Interop with other tools' formats (issue 9): LeRobot v3.0, Rerun, TUM, Project Aria, plots.

One module per tool. The LeRobot export and import and the TUM export need only egopool's
own dependencies; Rerun, Project Aria and the plots import their optional packages
(``pip install egopool[interop]``) when called, so importing this package never needs them.

::

    from egopool.interop import export_lerobot, import_lerobot, export_tum, export_rerun
    export_lerobot("recordings/pick_cup", "lerobot/pick_cup", state=["observation.gripper_state"])
"""

from __future__ import annotations

from .aria import import_aria
from .lerobot_export import EpisodePart, LeRobotExport, export_episode, export_lerobot
from .lerobot_import import import_lerobot
from .lerobot_plan import EpisodeJob, LeRobotPlan, plan_export
from .plot import plot_episode, plot_episodes
from .rerun import RerunExport, export_rerun, view_episode
from .tum import TumExport, export_tum

__all__ = ["EpisodeJob", "EpisodePart", "LeRobotExport", "LeRobotPlan", "RerunExport", "TumExport", "export_episode",
           "export_lerobot", "export_rerun", "export_tum", "import_aria", "import_lerobot", "plan_export",
           "plot_episode", "plot_episodes", "view_episode"]
