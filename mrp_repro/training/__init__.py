"""Training code: the tiny backbone (`training.backbone`) and the MRP head (`training.mrp`), and what they share
(`training.common`: the LR schedule, the stage commands named in error messages, the loss-curve writer).

Each trainer takes a profile and an output directory; `mrp_repro.stages` decides the directories and
reuses finished runs (`python -m mrp_repro.stages backbone|head --profile P`).
"""
