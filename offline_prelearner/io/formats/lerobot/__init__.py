"""LeRobot datasets (v3.0 and v2.1): metadata and data files (:mod:`.dataset`), camera videos
decoded with PyAV (:mod:`.video`), the reader (:mod:`.reader`)."""
