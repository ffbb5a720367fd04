"""What the test suite shares: its tiers, hypothesis profiles, the crash harness and builders used by several modules.

Test modules import from here, never from each other (a split of the suite by file then drags nothing along).
"""
