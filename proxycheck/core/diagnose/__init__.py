"""Diagnosis: routes compared exchange by exchange (`differ`), the localizer that picks the next
route and names a culprit (`localize`), the verdict and its JSON document (`verdict`), the
verdict a stored run supports (`runverdict`), and what to do about a finding (`advice`).
"""
