"""The Bridge side: adapter to the installed megatron-bridge, snippet application, suites, anchors.

Nothing here is imported when the skill starts; each module imports megatron lazily.
"""
