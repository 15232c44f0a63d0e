// config.cpp: (being written)
