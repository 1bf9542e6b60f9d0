"""Adapters that run agents written for another SDK as Resumer stages, one package per SDK
(runs/integrations/<sdk>/), each importing its SDK itself: nothing in the core imports them, so
Resumer installs and runs without the SDKs (requirements-agents.txt has their pins). Each
package says what it may import of runs.
"""
